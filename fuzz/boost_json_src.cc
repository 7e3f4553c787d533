// Boost.JSON compiled into the fuzz target itself, so the sanitizers and the fuzzer's
// coverage see inside the JSON parser (the system library is built without them).
#include <boost/json/src.hpp>
