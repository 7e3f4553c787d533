// Private to checkpoint/*.cc (and the bench): <xxhash.h> with XXH3 routed to the fastest
// vector unit of the CPU at run time, where the library offers it.
//
// Why: Debian's libxxhash builds its plain entry points for SSE2; its x86 dispatcher picks
// AVX2 or AVX-512 variants at run time. Measured here (AMD EPYC, AVX-512): XXH3-64 19 ->
// 23 GB/s, and copy + hash of each 16-256 KiB piece 7-9 -> 9.5-10.5 GB/s against one
// thread's memcpy at 11-12 GB/s: what lets a verified warm load keep up with memcpy.
// SG_XXH3_DISPATCH is defined by checkpoint/CMakeLists.txt when the library links the
// dispatcher; without it this is plain <xxhash.h>. Include it instead of <xxhash.h>, never
// from a header: it #defines the XXH3 function names.
#pragma once

#include <xxhash.h>

#if defined(SG_XXH3_DISPATCH)
#include <xxh_x86dispatch.h>
#endif
