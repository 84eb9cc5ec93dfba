/*
 * mapfile.c - io_map_file (see mapfile.h).
 */
#define _DEFAULT_SOURCE /* madvise */
#define _POSIX_C_SOURCE 200809L

#include "io/mapfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"

er_status io_map_file(const char *path, void **map, size_t *size) {
    er_status st = ER_OK;
    struct stat sb;
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return er_fail(ER_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        st = er_fail(ER_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = er_fail(ER_ERR_IO, "%s: not a regular file", path);
    } else if (sb.st_size == 0) {
        st = er_fail(ER_ERR_FORMAT, "%s: empty file", path);
    } else {
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            st = er_fail(ER_ERR_IO, "%s: cannot map %zu bytes: %s", path, (size_t)sb.st_size, strerror(errno));
        } else {
            *map = p;
            *size = (size_t)sb.st_size;
        }
    }
    close(fd);
    return st;
}

void io_drop_pages(const void *map, size_t size, const void *p, size_t n) {
    const uintptr_t lo = (uintptr_t)map, hi = lo + size, page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)p, end = start + n;
    if (!map || start >= hi || end <= lo)
        return;
    start = start < lo ? lo : (start + page - 1) / page * page;
    end = end >= hi ? hi : end / page * page; /* the mapping's last page may be partial */
    if (start < end)
        madvise((void *)start, end - start, MADV_DONTNEED);
}
