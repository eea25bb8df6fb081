// A process's resident memory as Linux counts it (/proc/self/status): what a rank's step really
// costs the machine, allocator caches, gathered buffers and all, as users read it in `top`.
//
//   reset_peak_resident_bytes();   // the high-water mark starts again from the current size
//   ... train a step ...
//   const int64_t peak = peak_resident_bytes();
#pragma once

#include <cstdint>

namespace ooze {

int64_t resident_bytes();       // VmRSS
int64_t peak_resident_bytes();  // VmHWM: since the process started or the last reset
// Writes 5 to /proc/self/clear_refs (Linux 4.0 and later). False when it cannot: the peak then
// goes on from the process's start.
bool reset_peak_resident_bytes();

}  // namespace ooze
