#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(int argc,char**argv){
  for(int a=1;a<argc;a++){
    double best=1e9, sum=0;
    for(int r=0;r<300;r++){double t0=now(); void*h=dlopen(argv[a],RTLD_NOW|RTLD_LOCAL); double t1=now(); if(!h){printf("fail %s\n",dlerror());return 1;} dlclose(h); double d=t1-t0; sum+=d; if(d<best)best=d;}
    printf("%-12s best %.1f us mean %.1f us\n", argv[a], best, sum/300);
  }
}
