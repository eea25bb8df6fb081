// `ooze start`, `ooze status`, `ooze stop`: a cluster from plain commands, one per machine, so
// it runs anywhere a shell does (Slurm, Kubernetes, ssh loops).
//
//   ooze start --head [--host IP] [--port 6380] [--resources JSON]   # prints the join command
//   ooze start --address HEAD_IP:6380 [--token T] [--resources JSON]  # on every other machine
//   ooze status --address HEAD_IP:6380                                # nodes, actors, groups
//   ooze stop                                                         # what `start` started here
//
// The head machine runs a node too. Traffic is encrypted and authenticated with the cluster
// token `start --head` generates (or is given with --token); it is printed, and saved in
// /tmp/ooze/cluster/token (mode 0600) so commands on the same machine find it. Drivers join
// with RuntimeOptions::address and the token (or OOZE_CLUSTER_TOKEN). Without --block, start
// runs the services in the background and returns once they are up.
#pragma once

#include <string>
#include <vector>

namespace ooze::launcher {

int run_start_command(const std::vector<std::string>& args);
int run_status_command(const std::vector<std::string>& args);
int run_stop_command(const std::vector<std::string>& args);

}  // namespace ooze::launcher
