#pragma once

// Everything a trial author needs.
#include <crucible/batch.h>
#include <crucible/callback.h>
#include <crucible/config.h>
#include <crucible/data.h>
#include <crucible/datasets.h>
#include <crucible/distributed.h>
#include <crucible/early_stopping.h>
#include <crucible/errors.h>
#include <crucible/experiment.h>
#include <crucible/metrics.h>
#include <crucible/model_ema.h>
#include <crucible/optim.h>
#include <crucible/optimizers.h>
#include <crucible/registry.h>
#include <crucible/report.h>
#include <crucible/trainer.h>
#include <crucible/trial.h>
#include <crucible/trial_context.h>
#include <crucible/version.h>
