// A worker process: hosts one actor. Started by a node agent with the actor's id and the
// head's address in its environment, it fetches the actor's spec from the head, runs the
// constructor, listens for calls and tells the head it is alive. With max_concurrency 1 (the
// default) calls run one at a time on the loop thread itself, in the order they arrived (for one
// caller, the order it made them), on the thread that ran the constructor; with more, on that
// many executor threads, whose replies the loop thread sends.
//
// A method that throws answers with the exception's type and message (RemoteError at the
// caller) and the actor goes on. A constructor that throws makes the actor dead, with the
// exception as the reason. Malformed requests, unknown methods and undecodable arguments are
// answered with an error and change nothing.
#pragma once

namespace ooze::actors {

// True when the environment says this process is a worker.
bool started_as_worker();
// Serves the actor the environment names; returns the process's exit code.
int serve_actor_from_environment();

}  // namespace ooze::actors
