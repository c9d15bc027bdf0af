/*
 * intern: one shared copy of each distinct string, for the device strings
 * that every device of every node repeats (models, architectures, driver
 * versions, MIG profiles: a few dozen in a cluster, on 520,000 devices in
 * the largest). An interned string is immutable and lives as long as the
 * process, so holders copy the pointer and never free it.
 *
 * Bounded, because the strings come from objects in the API server: at
 * most INTERN_MAX_STRINGS strings of at most INTERN_MAX_LEN bytes each.
 * Thread-safe.
 */
#ifndef GPU_INTERN_H
#define GPU_INTERN_H

#define INTERN_MAX_LEN 255
#define INTERN_MAX_STRINGS 4096

/*
 * s's shared copy; "" for NULL or "". NULL when s is longer than
 * INTERN_MAX_LEN, when the pool holds INTERN_MAX_STRINGS strings and s is
 * not one of them, or when out of memory.
 */
const char *intern(const char *s);

#endif
