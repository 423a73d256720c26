// CAF 0.17.6 names a connection by its file descriptor, and when a connection closes its BASP
// broker defers the cleanup of that name (routing entry and context) through its message
// queue, until every message received before the close has been delivered. Linux hands an
// accepted socket the lowest free descriptor, so a client that connects right after another
// one left gets the same number while that cleanup can still be pending (a busy head: the
// queue waits on workers that wait for a scheduler thread). The new client's handshake then
// lands in the old context, the pending cleanup erases it, and every message the new client
// sends arrives without a sender: the gate cannot answer its hello, for as long as that
// connection lasts (docs/reliability.md, "Found, 2026-12-05").
//
// This definition in the executable interposes on libc's accept() (libcaf_io calls it through
// the PLT) and moves each accepted socket to a descriptor number taken in turn from a window,
// so a number comes back only after the whole window has been handed out since.
#include "runtime/fresh_accept.hpp"

#include "runtime/next_symbol.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

namespace dls::runtime::detail {

namespace {

std::atomic<int> next_descriptor{fresh_descriptor_first};

}  // namespace

int to_fresh_descriptor(int fd) {
  // A socket accept() placed in the window already is moved too: a process holding many
  // descriptors gets its lowest free ones there, and those come back at once like any other.
  if (fd < 0) return fd;
  for (int tries = 0; tries < 2; ++tries) {
    int want = next_descriptor.fetch_add(1, std::memory_order_relaxed);
    if (want >= fresh_descriptor_end) {
      // Back to the window's start (two threads doing this at once only hand out close numbers).
      next_descriptor.store(fresh_descriptor_first + 1, std::memory_order_relaxed);
      want = fresh_descriptor_first;
    }
    const int cloexec = ::fcntl(fd, F_GETFD) & FD_CLOEXEC;
    const int moved = ::fcntl(fd, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, want);
    if (moved < 0) return fd;  // no descriptor left from `want` up: keep the one accept gave
    if (moved < fresh_descriptor_end) {
      ::close(fd);
      // Numbers in use were skipped: go on after the one taken.
      if (moved > want) next_descriptor.store(moved + 1, std::memory_order_relaxed);
      return moved;
    }
    ::close(moved);  // the window is full from `want` up: once more from its start
    next_descriptor.store(fresh_descriptor_end, std::memory_order_relaxed);
  }
  return fd;
}

// Referenced from configure_networked_caf so that the linker always takes this object out of
// the static runtime library into every program that accepts CAF connections.
void fresh_accept_guard() {}

}  // namespace dls::runtime::detail

extern "C" int accept(int fd, sockaddr* addr, socklen_t* len) {
  using accept_fn = int (*)(int, sockaddr*, socklen_t*);
  static const auto real = dls::runtime::detail::next_symbol<accept_fn>("accept", "libc");
  return dls::runtime::detail::to_fresh_descriptor(real(fd, addr, len));
}
