/*
 * `vmem service`: run a working tree's daemon under the systemd user
 * manager. install writes the unit templates (systemd/, embedded at build
 * time, with this vmemd as ExecStart) into $XDG_CONFIG_HOME/systemd/user,
 * the tree's environment file into $XDG_CONFIG_HOME/vmem/trees/KEY.env,
 * and enables vmemd@KEY.socket; uninstall undoes that; status asks
 * systemctl. Every step is printed. The systemctl found in PATH is used.
 */
#ifndef VMEM_CLI_SERVICE_H
#define VMEM_CLI_SERVICE_H

/*
 * sub is "install", "uninstall" or "status"; root the canonical working
 * tree; vmemd the daemon program as auto-start would run it. Returns an
 * exit status: 0, 1 (a step failed), 2 (bad environment).
 */
int service_command(const char *sub, const char *root, const char *vmemd);

/*
 * Does `systemctl --user` reach a user manager (a user bus)? 0, -ENOTCONN
 * when it does not, or another -errno when systemctl cannot be run.
 * Prints nothing.
 */
int service_manager_reachable(void);

#endif
