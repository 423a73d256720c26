// Accepted sockets take descriptor numbers in turn from a window (runtime/fresh_accept.cpp):
// a client that connects right after another one left gets another number, where Linux alone
// gives the same one back, so CAF's pending cleanup of the old connection cannot hit it. The
// last case checks that CAF's own accept() is the one interposed.
#define BOOST_TEST_MODULE test_fresh_accept
#include <boost/test/unit_test.hpp>

#include "runtime/caf_setup.hpp"
#include "runtime/fresh_accept.hpp"
#include "runtime/transport.hpp"

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include <dirent.h>
#include <poll.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

namespace d = dls::runtime::detail;

namespace {

struct listener {
  int fd = -1;
  sockaddr_in addr{};
  listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    BOOST_REQUIRE(fd >= 0);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    BOOST_REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    BOOST_REQUIRE(::listen(fd, 8) == 0);
  }
  ~listener() { ::close(fd); }

  // One client connects, the server side accepts it through accept() as CAF does; returns the
  // accepted descriptor and closes the client end.
  int accept_one() const {
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    BOOST_REQUIRE(c >= 0);
    BOOST_REQUIRE(::connect(c, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
    int s = ::accept(fd, nullptr, nullptr);
    ::close(c);
    return s;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_connection_after_a_closed_one_gets_another_descriptor) {
  d::fresh_accept_guard();
  listener l;
  std::set<int> seen;
  for (int i = 0; i < 20; ++i) {
    int s = l.accept_one();
    BOOST_REQUIRE(s >= 0);
    BOOST_TEST(s >= d::fresh_descriptor_first);
    BOOST_TEST(s < d::fresh_descriptor_end);
    // Still a working socket: the peer closed, so a read sees the end of the stream.
    char byte;
    BOOST_TEST(::read(s, &byte, 1) == 0);
    ::close(s);  // freed before the next accept, as a client that left
    seen.insert(s);
  }
  BOOST_TEST(seen.size() == 20u);
}

BOOST_AUTO_TEST_CASE(moving_keeps_close_on_exec_and_leaves_bad_descriptors_alone) {
  BOOST_TEST(d::to_fresh_descriptor(-1) == -1);
  int p[2];
  BOOST_REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
  int moved = d::to_fresh_descriptor(p[0]);
  BOOST_TEST(moved >= d::fresh_descriptor_first);
  BOOST_TEST((::fcntl(moved, F_GETFD) & FD_CLOEXEC) != 0);
  BOOST_TEST(::fcntl(p[0], F_GETFD) == -1);  // the low number was closed
  // A number in the window moves on too (the lowest free ones of a process holding many
  // descriptors are there), and the number it had is closed.
  int again = d::to_fresh_descriptor(moved);
  BOOST_TEST(again != moved);
  BOOST_TEST(again >= d::fresh_descriptor_first);
  BOOST_TEST(::fcntl(moved, F_GETFD) == -1);
  ::close(again);
  ::close(p[1]);
}

BOOST_AUTO_TEST_CASE(the_window_wraps_around_to_its_start) {
  int last = -1;
  bool wrapped = false;
  for (int i = 0; i < 2 * (d::fresh_descriptor_end - d::fresh_descriptor_first); ++i) {
    int p[2];
    BOOST_REQUIRE(::pipe(p) == 0);
    int moved = d::to_fresh_descriptor(p[0]);
    BOOST_REQUIRE(moved >= d::fresh_descriptor_first);
    BOOST_REQUIRE(moved < d::fresh_descriptor_end);
    wrapped = wrapped || moved < last;
    last = moved;
    ::close(moved);
    ::close(p[1]);
  }
  BOOST_TEST(wrapped);
}

// The fix works only if libcaf_io's own call to accept() reaches the definition in this program
// (a link change such as -Bsymbolic or a static libc would undo it silently): a connection to a
// port CAF publishes must sit on a descriptor in the window.
BOOST_AUTO_TEST_CASE(the_socket_caf_accepts_is_in_the_window) {
  caf::actor_system_config cfg;
  dls::runtime::configure_networked_caf(cfg, {}, dls::runtime::transport_security::insecure());
  caf::actor_system sys{cfg};
  auto idle = sys.spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
  auto port = sys.middleman().publish(idle, 0, "127.0.0.1");
  BOOST_REQUIRE_MESSAGE(port, (port ? std::string() : sys.render(port.error())));
  int c = ::socket(AF_INET, SOCK_STREAM, 0);
  BOOST_REQUIRE(c >= 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(*port);
  BOOST_REQUIRE(::connect(c, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
  // CAF writes its handshake once it has accepted the connection: its first byte means the
  // server's socket exists.
  pollfd p{c, POLLIN, 0};
  BOOST_REQUIRE_MESSAGE(::poll(&p, 1, 30000) == 1, "CAF sent no handshake within 30 s");
  sockaddr_in mine{};
  socklen_t len = sizeof mine;
  BOOST_REQUIRE(::getsockname(c, reinterpret_cast<sockaddr*>(&mine), &len) == 0);
  // The server's end is the descriptor of this process whose peer is the client's address.
  int server_fd = -1;
  DIR* dir = ::opendir("/proc/self/fd");
  BOOST_REQUIRE(dir != nullptr);
  while (auto* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd == c || e->d_name[0] == '.') continue;
    sockaddr_in peer{};
    socklen_t plen = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) == 0 && peer.sin_family == AF_INET &&
        peer.sin_port == mine.sin_port && peer.sin_addr.s_addr == mine.sin_addr.s_addr)
      server_fd = fd;
  }
  ::closedir(dir);
  ::close(c);
  BOOST_REQUIRE_MESSAGE(server_fd >= 0, "no descriptor of this process holds CAF's end of the connection");
  BOOST_TEST(server_fd >= dls::runtime::detail::fresh_descriptor_first);
  BOOST_TEST(server_fd < dls::runtime::detail::fresh_descriptor_end);
  caf::anon_send_exit(idle, caf::exit_reason::user_shutdown);
}
