#include "json_problem.h"

namespace opf::chakra {

std::string json_problem(simdjson::error_code e) {
  switch (e) {
    case simdjson::NUMBER_OUT_OF_RANGE:
    case simdjson::NUMBER_ERROR: return "number out of range or malformed (integers must fit in 64 bits)";
    case simdjson::UNCLOSED_STRING: return "truncated or malformed JSON: a string is never closed";
    case simdjson::INCOMPLETE_ARRAY_OR_OBJECT: return "truncated JSON: an object or array is not closed";
    case simdjson::TAPE_ERROR: return "truncated or malformed JSON (" + std::string(simdjson::error_message(e)) + ")";
    default: return std::string("invalid JSON: ") + simdjson::error_message(e);
  }
}

std::string json_doc_where(simdjson::error_code e, size_t length) {
  if (e == simdjson::INCOMPLETE_ARRAY_OR_OBJECT || e == simdjson::UNCLOSED_STRING)
    return "byte " + std::to_string(length) + " (end of file)";
  return "byte 0";
}

}  // namespace opf::chakra
