#include "common/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "opforge/error.h"

namespace opf::hash {
namespace {

// Streaming, so a large artefact is hashed without reading it into memory.
class Sha256 {
 public:
  Sha256() {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw Error("OpenSSL: cannot initialise SHA-256");
  }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx_.get(), p, n); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &n);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < n; ++i) {
      out += digits[md[i] >> 4];
      out += digits[md[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx_{EVP_MD_CTX_new(), EVP_MD_CTX_free};
};

}  // namespace

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read " + path + ": " + std::strerror(errno));
  Sha256 h;
  char buf[1 << 16];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) h.update(buf, size_t(n));
  const int e = errno;
  ::close(fd);
  if (n < 0) throw Error("cannot read " + path + ": " + std::strerror(e));
  return h.hex();
}

}  // namespace opf::hash
