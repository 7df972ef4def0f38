/* Loom: which declarations the shared library exports.
 *
 * The library is compiled with hidden visibility (-fvisibility=hidden):
 * only declarations marked LOOM_API are exported by libloom.so, so that a
 * binding sees the public API and nothing it could come to depend on by
 * accident. Every function declared in include/loom/ carries it. */
#ifndef LOOM_EXPORT_H
#define LOOM_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define LOOM_API __attribute__((visibility("default")))
#endif
#ifndef LOOM_API
#define LOOM_API
#endif

#endif
