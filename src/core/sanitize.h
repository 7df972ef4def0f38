/* Whether AddressSanitizer instruments this build. Memory kept for reuse
 * (core/storage.c's freed blocks, a graph's id blocks) is then not kept:
 * each request gets an allocation of its own, so that a use after free
 * or an overrun shows. */
#ifndef LOOM_CORE_SANITIZE_H
#define LOOM_CORE_SANITIZE_H

#if defined(__SANITIZE_ADDRESS__)
#define CORE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CORE_ASAN 1
#endif
#endif
#ifndef CORE_ASAN
#define CORE_ASAN 0
#endif

#endif
