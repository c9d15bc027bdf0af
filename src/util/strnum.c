#include "strnum.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

bool strnum_i64(const char *s, int64_t *out)
{
	if (!s || !*s || isspace((unsigned char)*s))
		return false;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

bool strnum_u32(const char *s, uint32_t *out)
{
	int64_t v;
	if (!strnum_i64(s, &v) || v < 0 || v > UINT32_MAX)
		return false;
	*out = (uint32_t)v;
	return true;
}

bool strnum_int(const char *s, int min, int max, int *out)
{
	int64_t v;
	if (!strnum_i64(s, &v) || v < min || v > max)
		return false;
	*out = (int)v;
	return true;
}

bool strnum_double(const char *s, double *out)
{
	if (!s || !*s || isspace((unsigned char)*s))
		return false;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || !isfinite(v))
		return false;
	*out = v;
	return true;
}

/* Suffixes of resource.Quantity: binary, decimal, and the milli suffix. */
static bool quantity_suffix(const char *sfx, double *mult)
{
	static const struct { const char *s; double m; } table[] = {
		{ "", 1 }, { "m", 1e-3 }, { "k", 1e3 }, { "M", 1e6 }, { "G", 1e9 },
		{ "T", 1e12 }, { "P", 1e15 }, { "E", 1e18 },
		{ "Ki", 1024.0 }, { "Mi", 1048576.0 }, { "Gi", 1073741824.0 },
		{ "Ti", 1099511627776.0 }, { "Pi", 1125899906842624.0 },
		{ "Ei", 1152921504606846976.0 },
	};
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (!strcmp(sfx, table[i].s)) {
			*mult = table[i].m;
			return true;
		}
	}
	return false;
}

bool strnum_quantity(const char *s, int64_t scale, int64_t *out)
{
	if (!s || !*s || scale <= 0)
		return false;
	const char *p = s;
	if (*p == '+' || *p == '-')
		p++;
	const char *digits = p;
	while (isdigit((unsigned char)*p) || *p == '.')
		p++;
	if (p == digits)
		return false;
	/* An exponent ("1e3") is part of the number, unless it is the "E" suffix. */
	if ((*p == 'e' || *p == 'E') && (isdigit((unsigned char)p[1]) ||
	    ((p[1] == '+' || p[1] == '-') && isdigit((unsigned char)p[2])))) {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		while (isdigit((unsigned char)*p))
			p++;
	}
	char num[64];
	size_t n = (size_t)(p - s);
	if (n >= sizeof(num))
		return false;
	memcpy(num, s, n);
	num[n] = '\0';
	double v, mult;
	if (!strnum_double(num, &v) || !quantity_suffix(p, &mult))
		return false;
	double scaled = ceil(v * mult * (double)scale - 1e-9);
	if (!isfinite(scaled) || scaled > 9.2e18 || scaled < -9.2e18)
		return false;
	*out = (int64_t)scaled;
	return true;
}

bool str_copy(char *dst, size_t size, const char *src)
{
	if (!size)
		return false;
	size_t n = strlen(src);
	bool fits = n < size;
	if (!fits)
		n = size - 1;
	memcpy(dst, src, n);
	dst[n] = '\0';
	return fits;
}
