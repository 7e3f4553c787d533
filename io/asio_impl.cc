// The compiled parts of Boost.Asio and Boost.Beast, built once for all of io/ (they are
// compiled with BOOST_ASIO_SEPARATE_COMPILATION / BOOST_BEAST_SEPARATE_COMPILATION), so
// each io/*.cc instantiates less: compile time matters on 2 cores.
#include <boost/asio/impl/src.hpp>
#include <boost/beast/src.hpp>
