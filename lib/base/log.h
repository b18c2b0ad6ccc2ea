// clade's log: messages go to the callback installed with clade_set_log
// (none by default), from the thread whose call they describe.
#pragma once

#include <string>

#include "clade/clade.h"

namespace clade {

void set_log(clade_log_fn fn, void* user, clade_log_level min_level);
bool log_enabled(clade_log_level level);
void log(clade_log_level level, const std::string& message);

}  // namespace clade
