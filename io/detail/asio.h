// Internal to io/: gives io/*.cc the io_context behind an EventLoop. Never include this
// from a header outside io/detail or from another module: it pulls in Boost.Asio.
#pragma once

#include <boost/asio/io_context.hpp>

#include "io/event_loop.h"

namespace shardguard::io::detail {

struct EventLoopAccess {
  static boost::asio::io_context& context(EventLoop& loop);
};

inline boost::asio::io_context& asio_context(EventLoop& loop) {
  return EventLoopAccess::context(loop);
}

}  // namespace shardguard::io::detail
