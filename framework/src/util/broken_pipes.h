#pragma once

namespace crucible::util {

// Makes a write to a socket or pipe whose reader has gone fail with EPIPE in this process instead
// of killing it with SIGPIPE, so that the writer can report the closed connection. Only when
// SIGPIPE still has its default action: it then gets a handler that does nothing, which (unlike
// SIG_IGN) programs this process later execs do not inherit. A disposition the program set itself
// is kept. Required before this process talks to other ranks or serves them a store, since Gloo
// writes to its sockets without MSG_NOSIGNAL. May be called any number of times, from any thread;
// a disposition another thread sets at the same moment may be replaced by the handler.
void survive_broken_pipes();

// Whether `revents`, what poll(2) reported for `fd` asked for no event, says that `fd` is the
// write end of a pipe whose reader is gone (POLLERR) or a local stream socket whose peer closed
// (POLLHUP or POLLERR): the condition a write would meet as EPIPE. A file or a terminal never
// says so; a TCP connection says so only once a write failed.
bool reader_gone(int fd, short revents);

}  // namespace crucible::util
