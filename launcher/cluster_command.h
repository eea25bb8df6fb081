// `ooze start`, `ooze status`, `ooze stop`: a cluster from plain commands, one per machine, so
// it runs anywhere a shell does (Slurm, Kubernetes, ssh loops).
//
//   ooze start --head [--host IP] [--port 6380] [--resources JSON]   # prints the join command
//   ooze start --address HEAD_IP:6380 [--token T] [--resources JSON]  # on every other machine
//   ooze start --head --host 0.0.0.0 --node-ip POD_IP                 # every interface
//   ooze status --address HEAD_IP:6380                                # nodes, actors, groups
//   ooze stop                                                         # what `start` started here
//
// The head machine runs a node too. Traffic is encrypted and authenticated with the cluster
// token `start --head` generates (or is given with --token); it is printed, and saved in
// /tmp/ooze/cluster/token (mode 0600; $OOZE_CLUSTER_DIR moves the directory) so commands on the
// same machine find it. Drivers (`ooze train --address`) find it as the commands here do:
// find_cluster_token(). Without --block, start runs the services in the background and returns
// once they are up. Each node's workers listen at its --node-ip (by default --host on the head,
// and on other machines their address on the route to the head), which every machine must reach.
// A node whose head no longer lists it alive stops its workers and exits with status 1.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace ooze::launcher {

// The token of the cluster this machine belongs to: $OOZE_CLUSTER_TOKEN, else the one `ooze
// start` saved in $OOZE_CLUSTER_DIR (default /tmp/ooze/cluster); empty when there is neither.
std::string find_cluster_token();

// Their flags.
const ConfigSchema& start_schema();
const ConfigSchema& status_schema();
const ConfigSchema& stop_schema();  // none

int run_start_command(const std::vector<std::string>& args);
int run_status_command(const std::vector<std::string>& args);
int run_stop_command(const std::vector<std::string>& args);

}  // namespace ooze::launcher
