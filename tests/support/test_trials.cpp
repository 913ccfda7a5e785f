// The test trials as a plugin library, for `trainer` and loader tests.
#include "test_trials.h"

using crucible::testing::BatchNormTrial;
using crucible::testing::BothEvalTrial;
using crucible::testing::ClippingTrial;
using crucible::testing::EmaTrial;
using crucible::testing::FreezeTrial;
using crucible::testing::FullDatasetTrial;
using crucible::testing::IdleLayerTrial;
using crucible::testing::NeitherEvalTrial;
using crucible::testing::RecordingTrial;
using crucible::testing::ReducerTrial;
using crucible::testing::ResumableTrial;
using crucible::testing::SearchTrial;
using crucible::testing::ThrowingCtorTrial;

CRUCIBLE_REGISTER_TRIAL(RecordingTrial);
CRUCIBLE_REGISTER_TRIAL(ResumableTrial);
CRUCIBLE_REGISTER_TRIAL(ReducerTrial);
CRUCIBLE_REGISTER_TRIAL(BatchNormTrial);
CRUCIBLE_REGISTER_TRIAL(EmaTrial);
CRUCIBLE_REGISTER_TRIAL(ClippingTrial);
CRUCIBLE_REGISTER_TRIAL(IdleLayerTrial);
CRUCIBLE_REGISTER_TRIAL(FreezeTrial);
CRUCIBLE_REGISTER_TRIAL(BothEvalTrial);
CRUCIBLE_REGISTER_TRIAL(NeitherEvalTrial);
CRUCIBLE_REGISTER_TRIAL(ThrowingCtorTrial);
CRUCIBLE_REGISTER_TRIAL(SearchTrial);
CRUCIBLE_REGISTER_TRIAL(FullDatasetTrial);

// CRUCIBLE_TEST_CRASH=static@0 crashes this library's static initialisation, inside the dlopen
// that loads it (an exported function, so that the crash report's stack names it).
__attribute__((noinline, visibility("default"))) bool crash_while_loading() {
  crucible::testing::crash_if_asked("static", 0, -1);
  return true;
}
static const bool kLoaded = crash_while_loading();
