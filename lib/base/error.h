// Internal error type: thrown inside the core, caught at the C boundary
// (lib/api/), turned into a clade_status plus a per-thread message.
#pragma once

#include <stdexcept>
#include <string>

#include "clade/clade.h"

namespace clade {

class Error : public std::runtime_error {
 public:
  Error(clade_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  clade_status status() const { return status_; }

 private:
  clade_status status_;
};

[[noreturn]] inline void fail(clade_status status, const std::string& message) {
  throw Error(status, message);
}

// The calling thread's clade_last_error() text. The C boundary clears it
// when a call begins and sets it for every status but CLADE_OK.
inline std::string& last_error_text() {
  thread_local std::string text;
  return text;
}

// A status returned rather than thrown (CLADE_CACHE_FULL and the other
// recoverable states), with the sentence clade_last_error() gives for it.
inline clade_status with_message(clade_status status, const std::string& message) {
  last_error_text() = message;
  return status;
}

}  // namespace clade
