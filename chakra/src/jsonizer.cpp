#include "jsonizer.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/reflection.h>

#include <charconv>
#include <cmath>

#include "atomic_output.h"
#include "common/json_escape.h"
#include "et_stream.h"
#include "py_repr.h"

namespace opf::chakra {

namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

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
      if (ev) opf::json::append_quoted(out, ev->name(), opf::json::Escape::python_ascii);
      else out += std::to_string(v);
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING: {
      std::string s = rep ? r->GetRepeatedString(m, f, idx) : r->GetString(m, f);
      if (f->type() == FieldDescriptor::TYPE_BYTES) base64(s, out);
      else opf::json::append_quoted(out, s, opf::json::Escape::python_ascii);
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
    opf::json::append_quoted(out, camel(f->name()), opf::json::Escape::python_ascii);
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
