# SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only
# The .deb's documents as Debian wants them (lintian): a machine-readable copyright made from
# LICENSE and LICENSES/, a changelog.Debian, both under /usr/share/doc/tricolor, gzipped where
# policy says (the changelog; the man pages are gzipped in tools/CMakeLists.txt).
set(TRICOLOR_DEB_MAINTAINER "tricolor maintainers <tricolor@example.org>"
    CACHE STRING "The .deb's Maintainer (and its changelog's signer): NAME <ADDRESS>")
set(deb_doc ${CMAKE_BINARY_DIR}/deb-doc)
file(MAKE_DIRECTORY ${deb_doc})

# copyright (DEP-5): the BSD text as LICENSE has it, and GPL-2 by Debian's common-licenses.
file(READ ${PROJECT_SOURCE_DIR}/LICENSE license)
string(FIND "${license}" "Redistribution and use" bsd_at)
string(SUBSTRING "${license}" ${bsd_at} -1 bsd)
string(STRIP "${bsd}" bsd)
string(REGEX REPLACE "\n\n" "\n.\n" bsd "${bsd}")
string(REGEX REPLACE "\n" "\n " bsd "${bsd}")
string(REGEX MATCH "Copyright \\(c\\) ([0-9]+), ([^\n]+)" _ "${license}")
set(holder "${CMAKE_MATCH_1} ${CMAKE_MATCH_2}")
# uPlot, built into tricolord for --web's page, under its own licence (Expat: Debian's name for
# this MIT text).
file(READ ${PROJECT_SOURCE_DIR}/userspace/daemon/web/vendor/uPlot/LICENSE uplot)
string(REGEX MATCH "Copyright \\(c\\) ([0-9]+) ([^\n]+)" _ "${uplot}")
set(uplot_holder "${CMAKE_MATCH_1} ${CMAKE_MATCH_2}")
string(FIND "${uplot}" "Permission is hereby" expat_at)
string(SUBSTRING "${uplot}" ${expat_at} -1 expat)
string(STRIP "${expat}" expat)
string(REGEX REPLACE "\n\n" "\n.\n" expat "${expat}")
string(REGEX REPLACE "\n" "\n " expat "${expat}")
file(WRITE ${deb_doc}/copyright
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: tricolor
Comment: Every source file says SPDX-License-Identifier: BSD-2-Clause OR GPL-2.0-only;
 the BPF programs declare \"Dual BSD/GPL\" to the kernel, the same choice.

Files: *
Copyright: ${holder}
License: BSD-2-Clause or GPL-2

Files: userspace/daemon/web/vendor/uPlot/*
Copyright: ${uplot_holder}
License: Expat

License: BSD-2-Clause
 ${bsd}

License: GPL-2
 This program is free software; you can redistribute it and/or modify it under the terms of
 the GNU General Public License version 2 as published by the Free Software Foundation.
 .
 On Debian systems, the complete text of the GNU General Public License version 2 can be
 found in /usr/share/common-licenses/GPL-2 (the same text as LICENSES/GPL-2.0-only.txt in
 the source).

License: Expat
 ${expat}
")

# changelog.Debian.gz: the version being packaged, signed by the maintainer, dated by the last
# commit where there is one (a rebuild of the same tree makes the same file).
set(TRICOLOR_DEB_VERSION "${PROJECT_VERSION}-${TRICOLOR_DEB_RELEASE}")
execute_process(COMMAND git -C ${PROJECT_SOURCE_DIR} log -1 --format=%ct
                OUTPUT_VARIABLE commit_time OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(commit_time)
  set(ENV{SOURCE_DATE_EPOCH} ${commit_time})
endif()
string(TIMESTAMP TRICOLOR_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file(${PROJECT_SOURCE_DIR}/cmake/deb/changelog.in ${deb_doc}/changelog.Debian @ONLY)
add_custom_command(
  OUTPUT ${deb_doc}/changelog.Debian.gz
  COMMAND gzip -9nf -k ${deb_doc}/changelog.Debian
  DEPENDS ${deb_doc}/changelog.Debian)
add_custom_target(deb_doc ALL DEPENDS ${deb_doc}/changelog.Debian.gz)
install(FILES ${deb_doc}/copyright ${deb_doc}/changelog.Debian.gz
        DESTINATION share/doc/tricolor)

# The config file, a conffile of the package (cmake/deb/conffiles): a commented example. Only
# into a staged install (DESTDIR, which file(INSTALL) puts first: the package's, as CPack makes
# it), never into this machine's /etc by `cmake --install` / `./tricolor.sh install`, where it
# could replace a config in use.
install(CODE "
  if(NOT \"\$ENV{DESTDIR}\" STREQUAL \"\")
    file(INSTALL ${PROJECT_SOURCE_DIR}/cmake/deb/tricolor.yaml
         DESTINATION /etc/tricolor FILE_PERMISSIONS OWNER_READ OWNER_WRITE
         GROUP_READ WORLD_READ)
  endif()
")
