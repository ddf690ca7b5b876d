// A dlopen()ed shared library: dlclose()d on destruction unless release()d (modules and drivers
// stay loaded for the life of the process once their code is in use).
#pragma once

#include <string>
#include <utility>

namespace opf {

class SharedLibrary {
 public:
  SharedLibrary() = default;
  ~SharedLibrary();
  SharedLibrary(SharedLibrary&& o) noexcept : handle_(std::exchange(o.handle_, nullptr)) {}
  SharedLibrary& operator=(SharedLibrary&& o) noexcept;
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // Throws opf::Error "<context>: <dlerror() text>".
  static SharedLibrary open(const std::string& path, int flags, const std::string& context);
  // An empty library on failure; *error (when given) gets dlerror()'s text.
  static SharedLibrary try_open(const std::string& path, int flags, std::string* error = nullptr);

  explicit operator bool() const { return handle_ != nullptr; }
  // nullptr when the library does not export name.
  template <class T>
  T symbol(const char* name) const {
    return reinterpret_cast<T>(raw_symbol(name));
  }
  void* release() { return std::exchange(handle_, nullptr); }

 private:
  explicit SharedLibrary(void* h) : handle_(h) {}
  void* raw_symbol(const char* name) const;
  void* handle_ = nullptr;
};

}  // namespace opf
