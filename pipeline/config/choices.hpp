#pragma once
// The config's closed choices (`tiler.border: pad`, `train.optimizer: sgd`, ...) and
// the one table per choice that spells them: the reader parses a choice once into
// its enum, writing the resolved config and messages name it back from the same
// table, and every consumer compares enums. The enums of the layers below are used
// where a layer has one (net's aggregator, optimizer and schedule kinds, tiler's
// border policy and background mode, the compute DType); the rest are the config's.
//
// Kept free of OpenCV and of any function of those layers (tiler/border_policy.hpp and
// tiler/background_mode.hpp hold only their enums): the config fuzz target
// (tests/fuzz) compiles the reader from its own sources alone.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kernels/core/device.hpp"
#include "net/aggregator.hpp"
#include "net/lr_schedule.hpp"
#include "net/optimizer.hpp"
#include "tiler/background_mode.hpp"
#include "tiler/border_policy.hpp"

namespace bigtrain {

enum class OnBadImage : std::uint8_t { error, skip };
// tiles: the network reads tile x tile crops of the image; resize: the whole image
// resized to resize_size (the baseline); stream: the encoder's trunk over the whole
// image, tile by tile with its receptive field's halo (net/streaming.hpp).
enum class TilerMode : std::uint8_t { tiles, resize, stream };
// dark: tissue on a bright slide; bright: objects on black.
enum class Foreground : std::uint8_t { dark, bright };
// data.normalize: dataset (x - mean) / std, or tile: each tile to mean 0 and std 1,
// or highpass: each tile less its Gaussian blur, then as tile.
enum class Normalization : std::uint8_t { dataset, tile, highpass };
enum class BestMetric : std::uint8_t { val_accuracy, val_balanced_accuracy, val_loss, val_auc };
// pretrain.method: rotation prediction, or SimCLR's contrast of two views of a tile.
enum class PretextMethod : std::uint8_t { rotation, contrastive };

// One spelling of a choice in YAML and the value it stands for.
template <typename E>
struct Choice {
  std::string_view name;
  E value;
};

// In the order the reader's error message lists them ("must be one of pad | drop | shift").
inline constexpr std::array<Choice<OnBadImage>, 2> kOnBadImageChoices{{{"error", OnBadImage::error},
                                                                        {"skip", OnBadImage::skip}}};
inline constexpr std::array<Choice<TilerMode>, 3> kTilerModeChoices{
    {{"tiles", TilerMode::tiles}, {"resize", TilerMode::resize}, {"stream", TilerMode::stream}}};
inline constexpr std::array<Choice<tiler::BorderPolicy>, 3> kBorderChoices{
    {{"pad", tiler::BorderPolicy::pad}, {"drop", tiler::BorderPolicy::drop}, {"shift", tiler::BorderPolicy::shift}}};
inline constexpr std::array<Choice<Foreground>, 2> kForegroundChoices{{{"dark", Foreground::dark},
                                                                        {"bright", Foreground::bright}}};
inline constexpr std::array<Choice<tiler::BackgroundMode>, 4> kBackgroundChoices{
    {{"otsu", tiler::BackgroundMode::otsu},
     {"fixed", tiler::BackgroundMode::fixed},
     {"local_contrast", tiler::BackgroundMode::local_contrast},
     {"none", tiler::BackgroundMode::none}}};
inline constexpr std::array<Choice<net::AggregatorKind>, 4> kAggregatorChoices{
    {{"mean", net::AggregatorKind::mean},
     {"max", net::AggregatorKind::max},
     {"attention", net::AggregatorKind::attention},
     {"instance", net::AggregatorKind::instance}}};
inline constexpr std::array<Choice<net::OptimizerKind>, 2> kOptimizerChoices{
    {{"sgd", net::OptimizerKind::sgd}, {"adamw", net::OptimizerKind::adamw}}};
// net's multistep schedule has no config keys for its milestones yet.
inline constexpr std::array<Choice<net::LrScheduleKind>, 3> kScheduleChoices{
    {{"constant", net::LrScheduleKind::constant},
     {"cosine", net::LrScheduleKind::cosine},
     {"step", net::LrScheduleKind::step}}};
inline constexpr std::array<Choice<Normalization>, 3> kNormalizationChoices{
    {{"dataset", Normalization::dataset}, {"tile", Normalization::tile}, {"highpass", Normalization::highpass}}};
inline constexpr std::array<Choice<BestMetric>, 4> kBestMetricChoices{
    {{"val_accuracy", BestMetric::val_accuracy},
     {"val_balanced_accuracy", BestMetric::val_balanced_accuracy},
     {"val_loss", BestMetric::val_loss},
     {"val_auc", BestMetric::val_auc}}};
inline constexpr std::array<Choice<PretextMethod>, 2> kPretextMethodChoices{
    {{"rotation", PretextMethod::rotation}, {"contrastive", PretextMethod::contrastive}}};
// train.precision: the compute type of the encoder's convolutions.
inline constexpr std::array<Choice<DType>, 3> kPrecisionChoices{
    {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}}};

// The table of each choice's enum, found by overload (choice_name, parse_choice).
constexpr std::span<const Choice<OnBadImage>> choices_of(OnBadImage) { return kOnBadImageChoices; }
constexpr std::span<const Choice<TilerMode>> choices_of(TilerMode) { return kTilerModeChoices; }
constexpr std::span<const Choice<tiler::BorderPolicy>> choices_of(tiler::BorderPolicy) { return kBorderChoices; }
constexpr std::span<const Choice<Foreground>> choices_of(Foreground) { return kForegroundChoices; }
constexpr std::span<const Choice<Normalization>> choices_of(Normalization) { return kNormalizationChoices; }
constexpr std::span<const Choice<tiler::BackgroundMode>> choices_of(tiler::BackgroundMode) {
  return kBackgroundChoices;
}
constexpr std::span<const Choice<net::AggregatorKind>> choices_of(net::AggregatorKind) { return kAggregatorChoices; }
constexpr std::span<const Choice<net::OptimizerKind>> choices_of(net::OptimizerKind) { return kOptimizerChoices; }
constexpr std::span<const Choice<net::LrScheduleKind>> choices_of(net::LrScheduleKind) { return kScheduleChoices; }
constexpr std::span<const Choice<BestMetric>> choices_of(BestMetric) { return kBestMetricChoices; }
constexpr std::span<const Choice<DType>> choices_of(DType) { return kPrecisionChoices; }
constexpr std::span<const Choice<PretextMethod>> choices_of(PretextMethod) { return kPretextMethodChoices; }

// The YAML spelling of `value`; "?" for a value the config cannot hold (net's
// multistep schedule, a DType no precision names).
template <typename E>
constexpr std::string_view choice_name(E value) {
  for (const auto& choice : choices_of(value))
    if (choice.value == value) return choice.name;
  return "?";
}

template <typename E>
constexpr std::optional<E> parse_choice(std::string_view name) {
  for (const auto& choice : choices_of(E{}))
    if (choice.name == name) return choice.value;
  return std::nullopt;
}

}  // namespace bigtrain
