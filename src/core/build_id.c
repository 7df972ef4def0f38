#include "core/build_id.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

enum { MAX_ID_BYTES = 64 };

static char id_hex[2 * MAX_ID_BYTES + 1];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The NT_GNU_BUILD_ID note among n bytes of notes at p, as hex. */
static int find_note(const char *p, size_t n) {
  size_t at = 0;
  while (at + sizeof(ElfW(Nhdr)) <= n) {
    const ElfW(Nhdr) *h = (const ElfW(Nhdr) *)(const void *)(p + at);
    size_t name = (h->n_namesz + 3) & ~(size_t)3, desc = (h->n_descsz + 3) & ~(size_t)3;
    const char *name_at = p + at + sizeof *h;
    const unsigned char *desc_at = (const unsigned char *)name_at + name;
    if (at + sizeof *h + name + desc > n) return 0;
    if (h->n_type == NT_GNU_BUILD_ID && h->n_namesz == 4 && !memcmp(name_at, "GNU", 4) &&
        h->n_descsz > 0 && h->n_descsz <= MAX_ID_BYTES) {
      static const char digits[] = "0123456789abcdef";
      for (uint32_t i = 0; i < h->n_descsz; i++) {
        id_hex[2 * i] = digits[desc_at[i] >> 4];
        id_hex[2 * i + 1] = digits[desc_at[i] & 15];
      }
      id_hex[2 * h->n_descsz] = '\0';
      return 1;
    }
    at += sizeof *h + name + desc;
  }
  return 0;
}

/* dl_iterate_phdr's visitor: the object whose base is *data's. */
static int visit(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  if ((void *)info->dlpi_addr != *(void **)data) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_NOTE &&
        find_note((const char *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz))
      return 1;
  }
  return 1; /* the object, without a build ID */
}

static void compute(void) {
  Dl_info where;
  if (!dladdr((void *)&core_build_id, &where) || !where.dli_fbase) return;
  /* A program's own base is 0 in dl_iterate_phdr unless it is a PIE;
   * dladdr gives the load address either way: match both. */
  void *base = where.dli_fbase;
  if (!dl_iterate_phdr(visit, &base)) {
    base = NULL;
    dl_iterate_phdr(visit, &base);
  }
}

const char *core_build_id(void) {
  pthread_once(&once, compute);
  return id_hex[0] ? id_hex : NULL;
}
