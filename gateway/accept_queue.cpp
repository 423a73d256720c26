#include "gateway/accept_queue.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace dls::gateway {

namespace {

int local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return -1;
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

bool listening_tcp(int fd) {
  int accepting = 0, type = 0;
  socklen_t len = sizeof accepting;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting) return false;
  len = sizeof type;
  return ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM;
}

}  // namespace

std::string deepen_accept_queue(int port, int backlog) {
  std::error_code ec;
  int found = 0;
  // cpp-httplib keeps its socket private; the process's open descriptors are the way to it.
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    if (!listening_tcp(fd) || local_port(fd) != port) continue;
    if (::listen(fd, backlog) != 0) return std::string("listen: ") + std::strerror(errno);
    ++found;
  }
  if (ec) return "cannot list /proc/self/fd: " + ec.message();
  if (found == 0) return "no listening socket on port " + std::to_string(port);
  return "";
}

}  // namespace dls::gateway
