// SHA-256 (OpenSSL's libcrypto) as lowercase hex: content hashes for cache keys, artefact
// checksums and stable ids.
#pragma once

#include <string>
#include <string_view>

namespace opf::hash {

std::string sha256_hex(std::string_view data);
std::string sha256_file(const std::string& path);  // throws opf::Error "cannot read <path>: <why>"

}  // namespace opf::hash
