/* Fuzz harness for the module cache's reader (backend/cpu/module_cache.h):
 * the check of an entry's seal, the seal itself, the names the pruner
 * reads in the cache directory, and the index's entries
 * (backend/cpu/module_index.h). Built with tests/fuzz/driver.c (any
 * compiler) or with clang -fsanitize=fuzzer; seeds in
 * tests/fuzz/corpus/cache/.
 *
 * The first byte of an input picks what the rest is (its value mod 4, so
 * that the text seeds '0' to '3' pick each):
 *   0: an entry's bytes, checked against KEY as the loader checks a file.
 *      One that passes must be exactly its body sealed for KEY anew, and
 *      must fail against any other key.
 *   1: a body, sealed for KEY (the last 4 bytes, when there are, give a
 *      byte of the sealed file to change and how): the sealed file must
 *      pass, fail for another key, and fail once any one byte changes.
 *   2: a file name, classified as the pruner does; what it says must agree
 *      with the name's form.
 *   3: an index entry's body for a plan of as many groups as the next
 *      byte says, over as many slots as the one after: one that is read
 *      must describe exactly that plan soundly (maps in order and within
 *      the slots, each generated group's function generated and no later
 *      than it).
 * A property that does not hold aborts, which the driver reports with the
 * input. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/cpu/module_cache.h"
#include "backend/cpu/module_index.h"

static const char KEY[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
static const char OTHER_KEY[] =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeefe";

static void fail(const char *what, const char *detail) {
  fprintf(stderr, "fuzz_cache: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  abort();
}

/* A file in memory, reused for every input (memfd: no disk traffic). */
static int scratch_file(void) {
  static int fd = -1;
  if (fd < 0) fd = memfd_create("fuzz_cache", MFD_CLOEXEC);
  if (fd < 0) {
    FILE *f = tmpfile();
    fd = f ? dup(fileno(f)) : -1;
  }
  if (fd < 0) fail("no scratch file", NULL);
  return fd;
}

static int file_with(const uint8_t *data, size_t n) {
  int fd = scratch_file();
  if (ftruncate(fd, 0) != 0 || (n && pwrite(fd, data, n, 0) != (ssize_t)n))
    fail("cannot write the scratch file", NULL);
  return fd;
}

/* The scratch file's bytes, in a buffer the caller frees. */
static uint8_t *file_bytes(int fd, size_t *n) {
  off_t size = lseek(fd, 0, SEEK_END);
  uint8_t *b = malloc(size > 0 ? (size_t)size : 1);
  if (!b || size < 0 || pread(fd, b, (size_t)size, 0) != size) fail("cannot read back", NULL);
  *n = (size_t)size;
  return b;
}

/* body sealed for KEY, in a buffer the caller frees. */
static uint8_t *sealed(const uint8_t *body, size_t n, size_t *out_n) {
  int fd = file_with(body, n);
  if (cpu_cache_seal_fd(fd, "fuzz", KEY) != LOOM_OK) fail("seal failed", loom_last_error());
  return file_bytes(fd, out_n);
}

static void check_entry(const uint8_t *data, size_t n) {
  const char *defect = cpu_cache_defect(file_with(data, n), KEY);
  if (defect) {
    if (!*defect) fail("a defect without words", NULL);
    return;
  }
  if (n < CPU_CACHE_SEAL_BYTES) fail("accepted an entry shorter than a seal", NULL);
  if (!cpu_cache_defect(file_with(data, n), OTHER_KEY)) fail("accepted for another key", NULL);
  size_t m;
  uint8_t *again = sealed(data, n - CPU_CACHE_SEAL_BYTES, &m);
  if (m != n || memcmp(again, data, n) != 0)
    fail("accepted an entry that is not its body sealed", NULL);
  free(again);
}

static void seal_and_damage(const uint8_t *data, size_t n) {
  uint32_t where = 0;
  if (n >= 4) {
    n -= 4;
    memcpy(&where, data + n, 4);
  }
  size_t m;
  uint8_t *file = sealed(data, n, &m);
  if (m != n + CPU_CACHE_SEAL_BYTES) fail("the seal's length", NULL);
  const char *defect = cpu_cache_defect(file_with(file, m), KEY);
  if (defect) fail("refused its own seal", defect);
  if (!cpu_cache_defect(file_with(file, m), OTHER_KEY)) fail("accepted for another key", NULL);
  /* Any one byte changed, in the body or the seal. */
  size_t at = (where >> 8) % m;
  file[at] ^= (uint8_t)(where | 1);
  if (!cpu_cache_defect(file_with(file, m), KEY)) fail("accepted a changed byte", NULL);
  free(file);
}

static bool all_of(const char *s, size_t n, const char *set) { return strspn(s, set) >= n; }

static void classify_name(const uint8_t *data, size_t n) {
  char name[300];
  if (n >= sizeof name) n = sizeof name - 1;
  memcpy(name, data, n);
  name[n] = '\0';
  size_t len = strlen(name);
  long pid = 0;
  cpu_cache_name_t kind = cpu_cache_classify(name, &pid);
  if (kind != CPU_NAME_SCRATCH && pid != -1) fail("a pid for a name that is no scratch", name);
  if (kind == CPU_NAME_OBJECT &&
      !(len == 67 && all_of(name, 64, "0123456789abcdef") && !strcmp(name + 64, ".so")))
    fail("not an object's name", name);
  if (kind == CPU_NAME_SOURCE &&
      !(len == 66 && all_of(name, 64, "0123456789abcdef") && !strcmp(name + 64, ".c")))
    fail("not a source's name", name);
  if (kind == CPU_NAME_INDEX &&
      !(len == 68 && all_of(name, 64, "0123456789abcdef") && !strcmp(name + 64, ".idx")))
    fail("not an index entry's name", name);
  if (kind == CPU_NAME_SCRATCH) {
    if (strncmp(name, "tmp-", 4) != 0 || !isdigit((unsigned char)name[4]) ||
        pid != strtol(name + 4, NULL, 10) || len < 4 + 1 + 1 + 1 + 1 + 6)
      fail("not a scratch directory's name", name);
    for (size_t i = len - 6; i < len; i++)
      if (!isalnum((unsigned char)name[i])) fail("a scratch name's last six", name);
  }
}

static void read_index(const uint8_t *data, size_t n) {
  if (n < 2) return;
  int groups = data[0], slots = data[1];
  cg_module_t m;
  char module_key[CORE_SHA256_HEX];
  if (cpu_index_parse((const char *)data + 2, n - 2, groups, slots, &m, module_key)) {
    if (m.map_at[0] != 0) fail("maps that do not start at 0", NULL);
    for (int i = 0; i < groups; i++) {
      if (m.map_at[i + 1] < m.map_at[i]) fail("maps out of order", NULL);
      if (m.generated[i] && (m.function[i] < 0 || m.function[i] > i ||
                             !m.generated[m.function[i]]))
        fail("a function that is not an earlier generated group's", NULL);
    }
    for (int32_t k = 0; k < m.map_at[groups]; k++)
      if (m.maps[k] < 0 || m.maps[k] >= slots) fail("a slot outside the table", NULL);
    size_t len = strlen(module_key);
    if (len != 0 && len != 64) fail("a module key of neither 0 nor 64 digits", module_key);
  }
  cg_module_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  if (n == 0) return 0;
  switch (data[0] % 4) {
  case 0: check_entry(data + 1, n - 1); break;
  case 1: seal_and_damage(data + 1, n - 1); break;
  case 2: classify_name(data + 1, n - 1); break;
  default: read_index(data + 1, n - 1); break;
  }
  return 0;
}
