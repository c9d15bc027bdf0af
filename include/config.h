/*
 * config: the extender's settings. One table defines every setting once:
 * its --flag, its key in the config file (YAML or JSON), its default and
 * its help line, so --help, the file format and docs cannot drift apart.
 * Precedence: defaults < config file < flags.
 */
#ifndef GPU_CONFIG_H
#define GPU_CONFIG_H

#include "api.h"
#include "log.h"
#include "policy.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define CONFIG_PATH_MAX 512

struct config {
	char config_file[CONFIG_PATH_MAX];  /* --config: the settings file, "" = none */
	char listen[128];             /* host:port */
	char url_prefix[128];         /* "" or "/gpu-scheduler" */
	size_t max_body;              /* bytes */
	int threads;
	int bind_threads;
	int max_connections, max_per_address;
	enum policy_id policy;        /* default node policy */
	int filter_keeps_best;        /* filter passes only this many best nodes; 0: all that fit */
	bool keep_all_for_preferences; /* ...except for a pod that states a soft preference: all that fit */
	int bind_queue_limit_ms;      /* a GPU pod's filter waits while binds queue longer (backlog.h); 0: never */
	struct api_resources res;
	char inventory[CONFIG_PATH_MAX];   /* standalone mode when set */
	char tls_cert[CONFIG_PATH_MAX];
	char tls_key[CONFIG_PATH_MAX];
	char client_ca[CONFIG_PATH_MAX];
	int tls_reload_s;             /* re-read the TLS files this often; 0: on SIGHUP only */
	char debug_listen[128];       /* host:port of /debug/nodes (plain HTTP), "" = off */
	enum log_level log_level;
	bool log_json;
	/* cluster mode */
	char kubeconfig[CONFIG_PATH_MAX];
	char context[128];
	char lease_namespace[64];
	char identity[128];           /* this replica's name in reservations */
	bool insecure_skip_tls_verify;
	int reap_interval_s;
	int bind_timeout_s;           /* a reservation without a bound pod is released after this */
	int watch_idle_timeout_s;     /* the reservation watches: silent this long, they list again */
	char pod_selector[256];       /* label selector of pods that hold GPUs */
	int gang_timeout_s;           /* a gang's unused places are released after this */
	char gang_topology_key[128];  /* node label of the topology domains gangs keep to */
	bool events;                  /* post Events on pods, PodGroups (include/events.h) */
	bool normal_events;           /* the Normal ones too (GPUsAllocated a bound pod), not only Warnings */
	int node_summary_interval_s;  /* GpuNodeStatus counts written at most this often a node; 0: not written */
	int node_summary_writes_per_s;   /* ... and at most this many writes a second, all nodes together */
	bool nudge;                   /* nudge waiting pods when GPUs free (include/nudge.h) */
	int nudge_rate;               /* nudges a second at most */
	/* webhook */
	char webhook_listen[128];     /* host:port of the HTTPS /mutate server, "" = off */
	char webhook_cert[CONFIG_PATH_MAX];
	char webhook_key[CONFIG_PATH_MAX];
	char marker_resource[API_NAME_MAX];
	bool webhook_env;             /* inject the visible-devices variables (off with the device plugin) */
	char system_namespaces[512];  /* privileged pods here may select GPUs themselves */
};

void config_defaults(struct config *cfg);
/* Applies a YAML/JSON config file; -1 with err on an unknown key or bad value. */
int config_load_file(struct config *cfg, const char *path, char *err, size_t errlen);
/*
 * Applies argv (after the subcommand). --config FILE is applied first
 * wherever it appears, then the flags, then config_check(). Returns 0, 1
 * when --help or --help=markdown was asked (printed to out), or -1 with
 * err: a usage error (exit status 2), found before anything is loaded.
 */
int config_parse_args(struct config *cfg, int argc, char **argv, FILE *out, char *err, size_t errlen);
/*
 * What settings say together: TLS files in pairs, a client CA only with
 * TLS, the webhook's files with its address, the addresses HOST:PORT, the
 * URL prefix from '/'. 0, or -1 with err naming the flags.
 */
int config_check(const struct config *cfg, char *err, size_t errlen);
void config_usage(FILE *out);
/* The settings as the Markdown table of docs/configuration.md. */
void config_markdown(FILE *out);
/* Splits listen into host and port; -1 if malformed. */
int config_listen_split(const char *listen, char *host, size_t hostlen, int *port);

#endif
