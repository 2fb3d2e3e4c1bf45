// ndtcu: NDT scan registration on the command line.
#include "cli_app.hpp"

int main(int argc, char** argv) { return ndtcu::cli::run_cli(argc, argv); }
