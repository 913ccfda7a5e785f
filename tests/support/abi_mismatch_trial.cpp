// A trial library stamped as if built by another Crucible release (CRUCIBLE_ABI_STAMP is
// overridden on the command line); the loader must refuse it.
#include "test_trials.h"

using crucible::testing::RecordingTrial;
CRUCIBLE_REGISTER_TRIAL(RecordingTrial);
