#pragma once

// Accepted sockets get descriptor numbers in turn from a window instead of the lowest free one
// (the reason is in fresh_accept.cpp).
namespace dls::runtime::detail {

// The window: above the descriptors a process opens at start (logs, model shards, the state
// directory), and below FD_SETSIZE (1024), since cpp-httplib 0.11 waits on its sockets with
// select(), which cannot watch a higher number. 744 numbers: one returns only after 743 more
// connections were accepted, where the cleanup it must outlast takes milliseconds.
inline constexpr int fresh_descriptor_first = 256;
inline constexpr int fresh_descriptor_end = 1000;

// Moves `fd` to the window's next free number and closes it; returns `fd` itself when it is
// negative or when no number in the window is free.
int to_fresh_descriptor(int fd);

void fresh_accept_guard();

}  // namespace dls::runtime::detail
