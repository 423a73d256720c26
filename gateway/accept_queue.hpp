#pragma once
// The accept queue of the gateway's listening socket. Debian's cpp-httplib is a compiled
// library that listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG in our build does not
// reach it), so a burst of clients connecting at once overflows the queue while the accept
// thread waits for a core: the kernel drops their SYNs and they retry after 1, 3, 7... s or
// fail (9 of 200 concurrent streams in one test run). Linux takes a second listen() on a
// listening socket as a new backlog.
#include <string>

namespace dls::gateway {

/// Sets the backlog of the socket of this process listening on TCP `port` (IPv4 or IPv6) to
/// `backlog` (the kernel caps it at net.core.somaxconn). Returns "" or why it could not.
std::string deepen_accept_queue(int port, int backlog);

}  // namespace dls::gateway
