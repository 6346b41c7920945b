"""Packaging for minima (distribution name `minima-dl`, import name `minima`), driven by settings.ini as nbdev 2 projects are."""
from configparser import ConfigParser
import setuptools, shlex

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

licenses = {'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License')}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable']
py_versions = '3.10 3.11 3.12 3.13'.split()

def reqs(key): return shlex.split(cfg.get(key, ''))

lic = licenses[cfg['license']]
min_python = cfg['min_python']
setuptools.setup(
    name=cfg['lib_name'],
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'Natural Language :: ' + cfg['language'].title(),
                 'License :: ' + lic[1]]
                + ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]],
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=['minima', 'minima.*']),
    package_data={'minima': ['backend_ndarray/*.cu', 'backend_ndarray/*.cuh']},
    include_package_data=True,
    install_requires=reqs('requirements'),
    extras_require={'dev': reqs('dev_requirements'), 'data': reqs('data_requirements'),
                    'course': reqs('course_requirements'), 'student': reqs('student_requirements'),
                    'grading': reqs('grading_requirements')},
    python_requires='>=' + min_python,
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'console_scripts': reqs('console_scripts')},
    version=cfg['version'],
    author=cfg['author'],
    author_email=cfg['author_email'],
    description=cfg['description'],
    keywords=cfg['keywords'],
)
