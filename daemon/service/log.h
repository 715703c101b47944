/*
 * Daemon logging: one line per event on stderr. Under systemd (JOURNAL_STREAM
 * set) lines carry syslog priority prefixes ("<3>"); otherwise a UTC
 * timestamp. Library-like modules do not log; the daemon's glue does.
 */
#ifndef VMEM_DAEMON_LOG_H
#define VMEM_DAEMON_LOG_H

enum log_level {
	LOGL_ERR = 3,
	LOGL_WARNING = 4,
	LOGL_NOTICE = 5,
	LOGL_INFO = 6,
	LOGL_DEBUG = 7,
};

/* Choose the threshold and the line format from the environment. */
void log_init(enum log_level threshold);

/* Change the threshold at run time: lines above it are dropped. */
void log_set_level(enum log_level threshold);
enum log_level log_get_level(void);

void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define log_err(...)	log_msg(LOGL_ERR, __VA_ARGS__)
#define log_warn(...)	log_msg(LOGL_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOGL_NOTICE, __VA_ARGS__)
#define log_info(...)	log_msg(LOGL_INFO, __VA_ARGS__)
#define log_debug(...)	log_msg(LOGL_DEBUG, __VA_ARGS__)

#endif
