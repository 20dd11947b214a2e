#pragma once
// How foreground is told from background on a thumbnail (tiler/background.hpp), in
// a header of its own so that a config can name the choice without OpenCV.
#include <optional>
#include <string>

namespace bigtrain::tiler {

// How foreground is told from background on the thumbnail's grey levels:
//   otsu           - one global cut chosen by Otsu (a clean slide: bright glass, dark tissue);
//   fixed          - one global cut at `threshold`;
//   local_contrast - the departure from the local background level (a large median of
//                    the thumbnail), cut above the noise of that departure: objects on
//                    a background whose brightness drifts or has smooth texture, where
//                    any one global cut keeps or drops whole regions of background;
//   none           - every pixel is foreground.
enum class BackgroundMode { otsu, fixed, local_contrast, none };
std::optional<BackgroundMode> parse_background_mode(const std::string& name);
const char* background_mode_name(BackgroundMode mode);

}  // namespace bigtrain::tiler
