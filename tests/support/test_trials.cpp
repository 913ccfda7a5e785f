// The test trials as a plugin library, for `trainer` and loader tests.
#include "test_trials.h"

using crucible::testing::BatchNormTrial;
using crucible::testing::BothEvalTrial;
using crucible::testing::ClippingTrial;
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
CRUCIBLE_REGISTER_TRIAL(ClippingTrial);
CRUCIBLE_REGISTER_TRIAL(BothEvalTrial);
CRUCIBLE_REGISTER_TRIAL(NeitherEvalTrial);
CRUCIBLE_REGISTER_TRIAL(ThrowingCtorTrial);
CRUCIBLE_REGISTER_TRIAL(SearchTrial);
