// Content hashes for stable ids (cells, plans). SHA-256 from OpenSSL's libcrypto.
#pragma once

#include <string>
#include <string_view>

namespace opf::hash {

std::string sha256_hex(std::string_view data);

}  // namespace opf::hash
