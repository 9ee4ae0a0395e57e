/* An LD_PRELOAD library for the end-to-end tests (tests/support/clock.rs):
 * shifts the wall clock by FLOW_TEST_CLOCK_SHIFT seconds (negative: back in
 * time), as a clock corrected by NTP or set by hand would. Only the wall
 * clock moves; CLOCK_MONOTONIC and CLOCK_BOOTTIME are left alone, as the
 * kernel leaves them when the real clock is set. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static long shift(void) {
    const char *s = getenv("FLOW_TEST_CLOCK_SHIFT");
    return s ? atol(s) : 0;
}

static int is_wall(clockid_t id) {
    return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int rc = real(id, ts);
    if (rc == 0 && is_wall(id)) ts->tv_sec += shift();
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    int rc = clock_gettime(CLOCK_REALTIME, &ts);
    if (rc == 0 && tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    (void)tz;
    return rc;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
