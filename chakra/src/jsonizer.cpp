#include "jsonizer.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include <charconv>
#include <cmath>

#include "atomic_output.h"
#include "et_stream.h"
#include "py_repr.h"

namespace opf::chakra {

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

const char kHex[] = "0123456789abcdef";

// json.dumps(ensure_ascii=True) string
void json_string(const std::string& s, std::string& out) {
  out.push_back('"');
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  auto u = [&](uint32_t cp) {
    out += "\\u";
    for (int i = 3; i >= 0; --i) out.push_back(kHex[(cp >> (4 * i)) & 0xf]);
  };
  while (p < end) {
    unsigned char c = *p;
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) u(c);
          else out.push_back(char(c));
      }
      ++p;
      continue;
    }
    int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
    if (end - p < len) len = int(end - p);
    uint32_t cp = len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (int i = 1; i < len; ++i) cp = (cp << 6) | (p[i] & 0x3f);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      u(0xd800 + (cp >> 10));
      u(0xdc00 + (cp & 0x3ff));
    } else {
      u(cp);
    }
    p += len;
  }
  out.push_back('"');
}

std::string camel(const std::string& name) {  // protobuf's json_name rule
  std::string r;
  bool up = false;
  for (char c : name) {
    if (c == '_') {
      up = true;
      continue;
    }
    r.push_back(up ? char(std::toupper(uint8_t(c))) : c);
    up = false;
  }
  return r;
}

void py_float_json(double d, std::string& out) {
  if (std::isnan(d)) out += "\"NaN\"";
  else if (std::isinf(d)) out += d > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  else py_repr_double(d, out);
}

const char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
void base64(const std::string& s, std::string& out) {
  out.push_back('"');
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8) | uint8_t(s[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(kB64[(v >> (6 * k)) & 63]);
  }
  if (i + 1 == s.size()) {
    uint32_t v = uint8_t(s[i]) << 16;
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    out += "==";
  } else if (i + 2 == s.size()) {
    uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8);
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(kB64[(v >> 6) & 63]);
    out.push_back('=');
  }
  out.push_back('"');
}

void scalar(const Message& m, const Reflection* r, const FieldDescriptor* f, int idx, std::string& out) {
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      out += std::to_string(rep ? r->GetRepeatedInt32(m, f, idx) : r->GetInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      out += std::to_string(rep ? r->GetRepeatedUInt32(m, f, idx) : r->GetUInt32(m, f));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      out += '"';
      out += std::to_string(rep ? r->GetRepeatedInt64(m, f, idx) : r->GetInt64(m, f));
      out += '"';
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      out += '"';
      out += std::to_string(rep ? r->GetRepeatedUInt64(m, f, idx) : r->GetUInt64(m, f));
      out += '"';
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      py_float_json(rep ? r->GetRepeatedDouble(m, f, idx) : r->GetDouble(m, f), out);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT: {
      float v = rep ? r->GetRepeatedFloat(m, f, idx) : r->GetFloat(m, f);
      if (!std::isfinite(v)) {
        py_float_json(v, out);
        break;
      }
      // shortest decimal that round-trips the float32, printed as a Python float
      char buf[32];
      auto res = std::to_chars(buf, buf + sizeof buf, v);
      double d = 0;
      std::from_chars(buf, res.ptr, d);
      py_float_json(d, out);
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      out += (rep ? r->GetRepeatedBool(m, f, idx) : r->GetBool(m, f)) ? "true" : "false";
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      int v = rep ? r->GetRepeatedEnumValue(m, f, idx) : r->GetEnumValue(m, f);
      const auto* ev = f->enum_type()->FindValueByNumber(v);
      if (ev) json_string(ev->name(), out);
      else out += std::to_string(v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = rep ? r->GetRepeatedString(m, f, idx) : r->GetString(m, f);
      if (f->type() == FieldDescriptor::TYPE_BYTES) base64(s, out);
      else json_string(s, out);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: break;
  }
}

void message(const Message& m, std::string& out, int indent);

void value(const Message& m, const Reflection* r, const FieldDescriptor* f, int idx, std::string& out, int indent) {
  if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)
    message(f->is_repeated() ? r->GetRepeatedMessage(m, f, idx) : r->GetMessage(m, f), out, indent);
  else scalar(m, r, f, idx, out);
}

void newline(std::string& out, int indent) {
  out.push_back('\n');
  out.append(size_t(indent), ' ');
}

void message(const Message& m, std::string& out, int indent) {
  const auto* d = m.GetDescriptor();
  const auto* r = m.GetReflection();
  bool any = false;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    bool present = f->is_repeated() ? r->FieldSize(m, f) > 0 : r->HasField(m, f);
    if (!present) continue;
    out += any ? "," : "{";
    any = true;
    newline(out, indent + 2);
    json_string(camel(f->name()), out);
    out += ": ";
    if (f->is_repeated()) {
      out.push_back('[');
      for (int k = 0; k < r->FieldSize(m, f); ++k) {
        if (k) out.push_back(',');
        newline(out, indent + 4);
        value(m, r, f, k, out, indent + 4);
      }
      newline(out, indent + 2);
      out.push_back(']');
    } else {
      value(m, r, f, 0, out, indent + 2);
    }
  }
  if (!any) {
    out += "{}";
    return;
  }
  newline(out, indent);
  out.push_back('}');
}

}  // namespace

void append_message_json(const google::protobuf::Message& m, std::string& out) { message(m, out, 0); }

void jsonize(const std::string& in_et, const std::string& out_json, bool compat_reference) {
  EtReader rd(in_et, compat_reference);
  AtomicOutput out(out_json);
  std::string buf;
  ChakraProtoMsg::GlobalMetadata gm;
  if (rd.next(gm)) {
    append_message_json(gm, buf);
    ChakraProtoMsg::Node n;
    while (rd.next(n)) {
      append_message_json(n, buf);
      if (buf.size() > (1 << 20)) {
        out.write(buf);
        buf.clear();
      }
    }
  }
  out.write(buf);
  out.commit();
}

}  // namespace opf::chakra
