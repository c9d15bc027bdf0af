/*
 * intern: one shared copy of each distinct string, for the device strings
 * that every device of every node repeats (models, architectures, driver
 * versions, MIG profiles: a few dozen in a cluster, on 520,000 devices in
 * the largest), and in a second pool for Nodes' labels. An interned
 * string is immutable and lives as long as the process, so holders copy
 * the pointer and never free it.
 *
 * Bounded, because the strings come from objects in the API server: at
 * most INTERN_MAX_STRINGS (labels: INTERN_MAX_LABELS) strings of at most
 * INTERN_MAX_LEN bytes each. Thread-safe.
 */
#ifndef GPU_INTERN_H
#define GPU_INTERN_H

#define INTERN_MAX_LEN 255
#define INTERN_MAX_STRINGS 4096
#define INTERN_MAX_LABELS 16384

/*
 * s's shared copy; "" for NULL or "". NULL when s is longer than
 * INTERN_MAX_LEN, when the pool holds INTERN_MAX_STRINGS strings and s is
 * not one of them, or when out of memory.
 */
const char *intern(const char *s);
/*
 * The same from a pool of its own for Nodes' label keys and values, at
 * most INTERN_MAX_LABELS strings: most repeat on every node (the keys, a
 * zone, an instance type), while each node's unique ones (its hostname)
 * fill the pool in the order nodes come and are then kept by their node
 * (NULL here). The device strings' pool never fills with labels.
 */
const char *intern_label(const char *s);

#endif
