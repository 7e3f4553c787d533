#include <catch2/catch.hpp>

#include <cerrno>

#include "core/result.h"

using namespace shardguard;

namespace {
Result<int> half(int x) {
  if (x % 2 != 0) return Error(ErrorCode::kInvalid, std::to_string(x) + " is odd");
  return x / 2;
}
Result<int> quarter(int x) {
  SG_ASSIGN_OR_RETURN(int h, half(x));
  SG_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}
Status check_even(int x) {
  SG_RETURN_IF_ERROR(half(x));
  return {};
}
}  // namespace

TEST_CASE("Result carries a value or an error with context", "[core]") {
  REQUIRE(quarter(8).value() == 2);
  auto r = quarter(6);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == ErrorCode::kInvalid);
  CHECK(r.error().message() == "3 is odd");
  CHECK(r.error().context("step 7").message() == "step 7: 3 is odd");
  CHECK(check_even(4).ok());
  CHECK_FALSE(check_even(5).ok());
}

TEST_CASE("Error::from_errno maps errno to codes and names the operation", "[core]") {
  auto e = Error::from_errno("rename 'a' -> 'b'", ENOSPC);
  CHECK(e.code() == ErrorCode::kNoSpace);
  CHECK(e.sys_errno() == ENOSPC);
  CHECK(e.message() == "rename 'a' -> 'b': No space left on device");
  CHECK(Error::from_errno("open 'x'", ENOENT).code() == ErrorCode::kNotFound);
  CHECK(Error::from_errno("open 'x'", EACCES).code() == ErrorCode::kIo);
}
