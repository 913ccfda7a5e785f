// A program of the user's own that runs an experiment on two processes of this machine through
// the installed public API: my_fit CONFIG OUTPUT_DIR. Each launched worker reruns this program.
#include <iostream>

#include <crucible/crucible.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: my_fit CONFIG OUTPUT_DIR\n";
    return crucible::kExitBadUsage;
  }
  try {
    crucible::ExperimentOptions options;
    options.config_file(argv[1]).slots(2);
    options.fit().output_dir(argv[2]);
    const crucible::ExperimentResult result = crucible::run_experiment(options);
    if (result.fit) {
      std::cout << "trained " << result.fit->batches_trained << " batches into "
                << result.fit->run_dir << "\n";
    }
    if (!result.failure.empty()) std::cerr << "error: " << result.failure << "\n";
    return result.exit_code;
  } catch (const crucible::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  }
}
