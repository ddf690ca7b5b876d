#include "common/shared_library.h"

#include <dlfcn.h>

#include "opforge/error.h"

namespace opf {

SharedLibrary::~SharedLibrary() {
  if (handle_) ::dlclose(handle_);
}

SharedLibrary& SharedLibrary::operator=(SharedLibrary&& o) noexcept {
  if (this != &o) {
    if (handle_) ::dlclose(handle_);
    handle_ = std::exchange(o.handle_, nullptr);
  }
  return *this;
}

SharedLibrary SharedLibrary::open(const std::string& path, int flags, const std::string& context) {
  std::string why;
  SharedLibrary lib = try_open(path, flags, &why);
  if (!lib) throw Error(context + ": " + why);
  return lib;
}

SharedLibrary SharedLibrary::try_open(const std::string& path, int flags, std::string* error) {
  void* h = ::dlopen(path.c_str(), flags);
  if (!h && error) {
    const char* e = ::dlerror();
    *error = e ? e : "unknown dlopen error";
  }
  return SharedLibrary(h);
}

void* SharedLibrary::raw_symbol(const char* name) const { return handle_ ? ::dlsym(handle_, name) : nullptr; }

}  // namespace opf
