#include "tuning/chooser.h"

namespace fxopt {

Chooser& static_chooser() {
  static StaticChooser chooser;  // stateless: safe to share between threads and sessions
  return chooser;
}

}  // namespace fxopt
