#include "chrome_trace.h"

#include <cmath>

#include "common/json_escape.h"
#include "py_json.h"

namespace opf::chakra {

ChromeTrace::ChromeTrace() { out_ = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": ["; }

void ChromeTrace::begin_event() {
  if (!first_) out_.push_back(',');
  first_ = false;
  out_ += "\n";
}

void ChromeTrace::process_name(int64_t pid, std::string_view name) {
  begin_event();
  out_ += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": " + std::to_string(pid) + ", \"args\": {\"name\": ";
  opf::json::append_quoted(out_, name, opf::json::Escape::python_ascii);
  out_ += "}}";
}

void ChromeTrace::thread_name(int64_t pid, int64_t tid, std::string_view name) {
  begin_event();
  out_ += "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": " + std::to_string(pid) +
          ", \"tid\": " + std::to_string(tid) + ", \"args\": {\"name\": ";
  opf::json::append_quoted(out_, name, opf::json::Escape::python_ascii);
  out_ += "}}";
}

void ChromeTrace::complete(int64_t pid, int64_t tid, double ts_us, double dur_us, std::string_view name,
                           std::string_view args) {
  begin_event();
  out_ += "{\"ph\": \"X\", \"pid\": " + std::to_string(pid) + ", \"tid\": " + std::to_string(tid) + ", \"ts\": ";
  json_time(ts_us, out_);
  out_ += ", \"dur\": ";
  json_time(dur_us, out_);
  out_ += ", \"name\": ";
  opf::json::append_quoted(out_, name, opf::json::Escape::python_ascii);
  out_ += ", \"args\": {";
  out_ += args;
  out_ += "}}";
}

std::string ChromeTrace::take() {
  out_ += "\n]}\n";
  return std::move(out_);
}

void json_time(double v, std::string& out) {
  // 2^53: beyond it a double is always integral, and the integer text would be misleadingly exact
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) out += std::to_string(int64_t(v));
  else py_json_double(v, out);
}

}  // namespace opf::chakra
