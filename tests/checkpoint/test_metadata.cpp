// metadata.json as one type: what to_json writes, from_json reads back.
#include <cmath>
#include <limits>

#include "catch.h"

#include <crucible/trainer.h>

#include "checkpoint/checkpoint.h"
#include "process.h"

namespace ckpt = crucible::checkpoint;

TEST_CASE("checkpoint metadata reads back what it writes", "[checkpoint]") {
  ckpt::Metadata m;
  m.trial_class = "T";
  m.config = "name: x\n";
  m.batches = 40;
  m.records = 2560;
  m.epochs = 1.5;
  m.data_position = {1, 7};
  m.validation = {{"validation_loss", 0.25}};
  m.trainer_state.validated_at = 40;
  m.trainer_state.best_metric = 0.25;
  m.trainer_state.optimizer_counters = {{"optimizer_steps", {20}}};
  m.trainer_state.stopped = "early stopping: loss did not improve";
  m.num_models = 2;
  m.parts = {"grad_scaler"};
  m.schedulers = {{{"step_count", 3}}, {{"step_count", 5}, {"drops", 1}}};
  m.files = {{"model_0.pt", {{"size", 10}, {"crc32", "00000000"}}}};

  const ckpt::Metadata back = ckpt::Metadata::from_json(m.to_json(), "here");
  CHECK(back.to_json() == m.to_json());
  CHECK(back.trial_class == "T");
  CHECK(back.batches == 40);
  CHECK(back.epochs == 1.5);
  CHECK(back.data_position == crucible::DataPosition{1, 7});
  CHECK(back.trainer_state.best_metric == 0.25);
  CHECK(back.trainer_state.validated_at == 40);
  CHECK(back.trainer_state.stopped == "early stopping: loss did not improve");
  CHECK(back.num_models == 2);

  // JSON has no NaN or infinity: a NaN metric is written as null and an infinite one as "inf" or
  // "-inf", and they read back as such; another string is damage.
  const double inf = std::numeric_limits<double>::infinity();
  ckpt::Metadata diverged = m;
  diverged.trainer_state.last_validation = {
      {"validation_loss", std::nan("")}, {"n", 2}, {"up", inf}, {"down", -inf}};
  diverged.validation = diverged.trainer_state.last_validation;
  diverged.trainer_state.best_metric = -inf;
  nlohmann::json written = nlohmann::json::parse(diverged.to_json().dump());
  CHECK(written["trainer_state"]["last_validation"]["validation_loss"].is_null());
  CHECK(written["validation"]["up"] == "inf");
  CHECK(written["trainer_state"]["best_metric"] == "-inf");
  const ckpt::Metadata read = ckpt::Metadata::from_json(written, "here");
  for (const auto& values : {read.validation, read.trainer_state.last_validation}) {
    CHECK(std::isnan(values.at("validation_loss")));
    CHECK(values.at("n") == 2);
    CHECK(values.at("up") == inf);
    CHECK(values.at("down") == -inf);
  }
  CHECK(read.trainer_state.best_metric == -inf);
  written["validation"]["up"] = "Infinity";
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(written, "here"),
                    Catch::Contains("metric 'up' in 'validation' is \"Infinity\", not a number"));
  written["validation"]["up"] = "inf";
  written["trainer_state"]["best_metric"] = "best";
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(written, "here"),
                    Catch::Contains("'best_metric' is \"best\", not a number"));

  // A checkpoint from before scheduler states held their step counts.
  nlohmann::json older = m.to_json();
  older.erase("schedulers");
  older["scheduler_steps"] = {3, 7};
  CHECK(ckpt::Metadata::from_json(older, "here").schedulers ==
        nlohmann::json::array({{{"step_count", 3}}, {{"step_count", 7}}}));

  ckpt::Metadata fresh;
  fresh.files = nlohmann::json::object();
  CHECK_FALSE(ckpt::Metadata::from_json(fresh.to_json(), "here").trainer_state.best_metric);
  CHECK_FALSE(fresh.to_json()["trainer_state"].contains("stopped"));
}

TEST_CASE("checkpoint metadata of the wrong shape is a damaged checkpoint naming the key",
          "[checkpoint]") {
  ckpt::Metadata m;
  nlohmann::json json = m.to_json();
  json["batches"] = "many";
  CHECK_THROWS_AS(ckpt::Metadata::from_json(json, "ckpt/metadata.json"), ckpt::DamagedCheckpoint);
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(json, "ckpt/metadata.json"),
                    Catch::Contains("ckpt/metadata.json: 'batches' is \"many\""));
  // A float, or an integer the field cannot hold, is no count (2.7e40 read as an int64_t would
  // be undefined behaviour; the fuzzer found it).
  json["batches"] = 2.7e40;
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(json, "ckpt/metadata.json"),
                    Catch::Contains("'batches' is 2.7e+40, not of the type a checkpoint writes"));
  json["batches"] = 3;
  json["num_models"] = -1;
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(json, "ckpt/metadata.json"),
                    Catch::Contains("'num_models' is -1, not of the type"));
  json["num_models"] = 1;
  json["validation"] = {{"validation_loss", "low"}};
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(json, "ckpt/metadata.json"),
                    Catch::Contains("ckpt/metadata.json: metric 'validation_loss' in 'validation' "
                                    "is \"low\", not a number"));
  json["validation"] = nlohmann::json::object();
  json["schedulers"] = 4;
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(json, "ckpt/metadata.json"),
                    Catch::Contains("'schedulers' is 4, not a list"));
  json["schedulers"] = nlohmann::json::array();
  json["validation"] = {1, 2};
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(json, "ckpt/metadata.json"),
                    Catch::Contains("ckpt/metadata.json: 'validation' is [1,2], not metrics"));
  json["validation"] = nlohmann::json::object();
  json["files"] = {{"model_0.pt", 5}};
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(json, "ckpt/metadata.json"),
                    Catch::Contains("the entry of file 'model_0.pt' is 5, not its size and crc32"));
  json.erase("files");
  CHECK_THROWS_WITH(ckpt::Metadata::from_json(json, "ckpt/metadata.json"),
                    Catch::Contains("ckpt/metadata.json lacks its file list"));
}

TEST_CASE("a folder that is no checkpoint, or holds damaged metadata, is named", "[checkpoint]") {
  crucible::testing::TempDir tmp;
  CHECK_THROWS_AS(crucible::Trainer::from_checkpoint(tmp / "none"), crucible::UsageError);
  CHECK_THROWS_WITH(crucible::Trainer::from_checkpoint(tmp / "none"),
                    Catch::Contains("not a checkpoint (no readable metadata.json)"));
  crucible::testing::write_file(tmp / "metadata.json", "{not json");
  CHECK_THROWS_AS(crucible::Trainer::from_checkpoint(tmp.path()), crucible::TrainingError);
  CHECK_THROWS_WITH(crucible::Trainer::from_checkpoint(tmp.path()),
                    Catch::Contains(tmp / "metadata.json") &&
                        Catch::Contains("damaged or not Crucible checkpoint metadata"));
}
