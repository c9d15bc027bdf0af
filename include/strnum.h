/*
 * strnum: checked number parsing (no atoi), and Kubernetes quantities.
 * Every parser rejects empty input, trailing garbage and overflow.
 */
#ifndef GPU_STRNUM_H
#define GPU_STRNUM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

bool strnum_i64(const char *s, int64_t *out);
bool strnum_u32(const char *s, uint32_t *out);
bool strnum_int(const char *s, int min, int max, int *out);
bool strnum_double(const char *s, double *out);

/*
 * A Kubernetes resource quantity ("2", "500m", "16Gi", "1e3", "1.5") scaled
 * to an integer: *out = value * scale, rounded up, e.g. scale 1000 gives
 * milli-units ("500m" -> 500, "2" -> 2000). False on bad syntax or overflow.
 */
bool strnum_quantity(const char *s, int64_t scale, int64_t *out);

/* Copies src into dst[size], always terminating; false if it was cut. */
bool str_copy(char *dst, size_t size, const char *src);

#endif
