/* Files written whole or not at all: a reader sees the old file or the
 * complete new one, never a prefix (a crash, a full disk, a kill midway). */
#ifndef LOOM_CORE_FILE_H
#define LOOM_CORE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#include "loom/loom.h"

/* All n bytes of buf to fd, through short writes and interrupted calls;
 * an error names `path`. */
loom_status_t core_write_all(int fd, const char *path, const void *buf, size_t n);

/* t's elements, dense and in order, to fd (a strided view is copied
 * first). */
loom_status_t core_write_tensor(int fd, const char *path, const loom_tensor_t *t);

/* The whole regular file at path in a new buffer (*data, freed with
 * core_free; one byte past *size is 0), or an error naming path. Files
 * over max_bytes fail with LOOM_ERR_IO. */
loom_status_t core_read_file(const char *path, size_t max_bytes, void **data, size_t *size);
/* Bytes [offset, offset + length) of the regular file at path (length
 * UINT64_MAX: to its end) into *data (core_free), their count in *size:
 * LOOM_ERR_FORMAT when the range is not inside the file. */
loom_status_t core_read_file_range(const char *path, uint64_t offset, uint64_t length,
                                   void **data, size_t *size);

/* Makes the entries of directory dir (a rename into it) durable. Best
 * effort: a directory that cannot be opened for reading is left as is. */
void core_sync_dir(const char *dir);

/* Fills an open file: `tmp` names it in errors. */
typedef loom_status_t (*core_file_fill_t)(int fd, const char *tmp, void *ctx);

/* Writes `path` by fill() into a new file beside it (path.tmp.PID.N),
 * makes the bytes durable, renames it over path and syncs the directory.
 * On failure the new file is removed and path is as it was. A process
 * killed midway cannot remove its temporary: each save first removes
 * those of path's earlier saves whose process is gone
 * (core_file_clean_stale). */
loom_status_t core_file_replace(const char *path, core_file_fill_t fill, void *ctx);

/* Removes path.tmp.PID.N files beside path whose writer is gone
 * (core_owner_gone); returns how many. Names of another form are left. */
int core_file_clean_stale(const char *path);

/* Whether process pid, named in a file or directory last modified at
 * mtime, is gone: no such process, or the pid now names a process that
 * started after that change (the pid was reused). A live process of
 * another user counts as present. Pids of another pid namespace or host
 * look gone: the files are meant for one machine. */
bool core_owner_gone(long pid, time_t mtime);

#endif
