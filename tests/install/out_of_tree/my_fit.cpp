// A program of the user's own that runs an experiment through the installed public API:
// my_fit CONFIG OUTPUT_DIR [SLOTS]. With SLOTS, each launched worker reruns this program; with a
// searcher other than single, each trial is a run of the installed trainer.
#include <iostream>

#include <crucible/crucible.h>

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::cerr << "usage: my_fit CONFIG OUTPUT_DIR [SLOTS]\n";
    return crucible::kExitBadUsage;
  }
  try {
    crucible::ExperimentOptions options;
    options.config_file(argv[1]);
    if (argc == 4) options.slots(std::stoll(argv[3]));
    options.fit().output_dir(argv[2]);
    const crucible::ExperimentResult result = crucible::run_experiment(options);
    if (result.fit) {
      std::cout << "trained " << result.fit->batches_trained << " batches into "
                << result.fit->run_dir << "\n";
    }
    if (const auto& search = result.search; search && search->best_trial) {
      std::cout << "search: " << search->completed << " completed, best trial "
                << *search->best_trial << " at " << search->best_metric << ", checkpoint "
                << search->best_checkpoint << "\n";
    }
    if (!result.failure.empty()) std::cerr << "error: " << result.failure << "\n";
    return result.exit_code;
  } catch (const crucible::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  }
}
