// How a simdjson failure reads in the linker's one-line input errors (shared by the host ET index
// and the Kineto reader, so the same fault in either file gets the same words).
#pragma once

#include <simdjson.h>

#include <cstddef>
#include <string>

namespace opf::chakra {

// The problem: truncation and bad numbers in plain words, anything else with simdjson's message.
std::string json_problem(simdjson::error_code e);

// Where a document-level failure is: structure left open means the text stops early (the end of
// the file); anything else is reported at byte 0.
std::string json_doc_where(simdjson::error_code e, size_t length);

}  // namespace opf::chakra
