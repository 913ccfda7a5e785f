#include "cli.h"

int main(int argc, char** argv) {
  return crucible::cli::run(std::vector<std::string>(argv + 1, argv + argc));
}
