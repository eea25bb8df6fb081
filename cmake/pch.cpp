// Translation unit that owns the shared precompiled header (see cmake/Pch.cmake).
