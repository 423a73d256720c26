#pragma once
// The definition a symbol that this program interposes on would have had without it (the next
// one in the dynamic linker's search order); aborts with one line when there is none, since
// the interposer cannot do its job without it.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace dls::runtime::detail {

template <class F>
F next_symbol(const char* name, const char* library) {
  void* f = ::dlsym(RTLD_NEXT, name);
  if (!f) {
    std::fprintf(stderr, "dilaserve: fatal: cannot find %s in %s\n", name, library);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace dls::runtime::detail
