/*
 * none.c - `serve` in a build made with SERVER=0 (no libmicrohttpd or jansson on the
 * machine, as on the GPU machine): says so in one line, instead of the server.
 */
#include <stdio.h>

#include "../cli/cli.h"

int cmd_serve(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "edgerunner: serve: this build has no HTTP server (it was made with SERVER=0)\n");
    return 1;
}
