// Internal error type: thrown inside the core, caught at the C boundary
// (lib/api.cpp), turned into a clade_status plus a per-thread message.
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

}  // namespace clade
