#pragma once

// The single place the library version is written; CMake and Python read it from here.
#define CAI_VERSION_MAJOR 0
#define CAI_VERSION_MINOR 1
#define CAI_VERSION_PATCH 0
